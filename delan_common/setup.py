from setuptools import find_packages, setup

package_name = 'delan_common'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='delan_ros maintainers',
    maintainer_email='maintainers@delan-ros.invalid',
    description='Robot description, joint-state mapping and analytic dynamics shared by '
    'delan_ros.',
    license='BSD-3-Clause',
    extras_require={'test': ['pytest']},
)
